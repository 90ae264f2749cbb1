//! Process isolation (`StandbyConfig::isolation`): an incarnation's
//! operator chain runs in a child process of its own.
//!
//! ## What runs where
//!
//! The protocol stays in the driver: the incarnation's port (reading the
//! buffer queues, the determinant log, recovery points, the claim, the
//! fencing) and the ring senders at the chain's end run on the driver's
//! workers as in thread mode. What moves to the child is the operators'
//! code — the part that segfaults, aborts, runs out of memory or is
//! `kill -9`ed. The driver's chain is a [`RemoteChain`]: every call the
//! port makes on its chain ([`Collector`]) becomes a request message in a
//! pipe to the child ([`crate::standby::pipe`], in the attempt's standby
//! directory, 0600); the child calls its own chain, whose end writes every
//! call it receives into a reply pipe; the driver hands each reply to the
//! chain's real end. A child holds no slot, cursor, lock or epoch, so its
//! death, at any instruction, strands nothing: the driver sees it (the
//! child's `pidfd`, polled while it waits) and fails the incarnation as a
//! panic would, and a standby — whose own child is already running —
//! takes over exactly as in thread mode.
//!
//! ## Synchronous points
//!
//! Records, watermarks and a chunk's opening and closing flow without
//! waiting (a closed chunk is published to the child at once, so it works
//! while the port chooses the next, and the replies so far are handed on).
//! A flush (after every poll of the port) sends a sync number without
//! waiting; the task hands the child's replies on at each poll and polls
//! again soon while the child has not echoed the last number, so the
//! worker runs its other tasks while the child works. The end and a
//! snapshot wait until the child answered everything sent before. The
//! port's reasoning about chunks, marks and points holds unchanged: a
//! chunk's outputs and mark reach the consumers later, in order, and a
//! point is published only once the consumers acknowledge them. While it
//! waits, the driver's worker does not beat: a child that stops answering
//! (SIGSTOP, a stall) is judged stuck by the standby like a stuck thread.
//!
//! ## Following the points
//!
//! A point's capture (whole, or a delta over the point the following
//! standby's copy is at) rides on `R_SNAPSHOT`, so the primary's child
//! archives what thread isolation's primary would; its archive comes back
//! marked with the point it is a delta over. A following standby sends
//! each point's parts to its own child (`R_FOLLOW_PART`s, then
//! `R_FOLLOW`), which brings its chain's states forward and answers
//! whether it could (`A_FOLLOWED`); at the takeover `R_INSTALL` installs
//! what the points left. A point that does not apply is the standby's
//! failure, as in thread mode; the child itself stays usable.
//!
//! ## Faults
//!
//! Probes (fault injection) run in the driver, so a fault fires once per
//! run however many children replay its record; what it does — a panic, a
//! stall, a process death — is carried out by the child, on the record.

pub(crate) mod child;
mod link;
mod wire;

use crate::checkpoint::{CheckpointError, SnapshotBytes, StateCapture};
use crate::operator::{ChainParts, ChunkId, Collector};
use crate::record::Record;
use crate::runtime::graph::{AnyBox, Probe};
use crate::runtime::probe::ProbeAction;
use crate::runtime::task::TaskCtx;
use crate::standby::codec::Codec;
use crate::sys::process::ChildExit;
pub(crate) use link::Link;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
pub(crate) use wire::*;

/// Bytes of each pipe between the driver and a child.
pub(crate) const PIPE_BYTES: usize = 4 << 20;
/// Bytes of state in one message of a build or a snapshot.
const PIECE: usize = 256 << 10;
/// How long a child may take to answer its first message (it starts the
/// program again and builds the job) before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The chain's real end in the driver, fed the child's replies (built by
/// the chain's last operator's output type: `StreamKit::remote_tail`).
pub(crate) trait ReplyTail {
    /// Hands one reply (`A_RECORD` .. `A_CLOSE`) to the end of the chain.
    fn deliver(&mut self, msg: &[u8]) -> Result<(), String>;
}

/// The child's end of a request: decodes the chain's input records
/// (`StandbyKit::child_head`).
pub(crate) trait RequestHead {
    fn deliver(&mut self, tag: u8, body: &[u8]) -> Result<(), String>;
    fn snapshot(&mut self, parts: &mut ChainParts) -> Result<(), CheckpointError>;
    /// Brings the chain's states forward by a recovery point's parts.
    fn follow(&mut self, parts: &mut crate::operator::FollowParts)
        -> Result<bool, CheckpointError>;
    /// The followed chain goes live.
    fn install(&mut self);
}

/// Why an incarnation's work with its child ended. It fails the
/// incarnation ([`fail`]) — except [`Stopped`](Self::Stopped), which is no
/// failure of its own.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum IncarnationError {
    /// The incarnation is no longer wanted (fenced, or its attempt
    /// stopped): its port finds out itself.
    #[error("the incarnation was stopped")]
    Stopped,
    /// The child process exited, was killed, or was killed as stuck.
    #[error("{what}: the process {how}")]
    ChildDied {
        /// `operator[instance] incarnation N (process P)`.
        what: String,
        /// What happened to it.
        how: String,
        /// The driver killed it as stuck: the liveness rule's evidence.
        stuck: Option<String>,
    },
    /// The child reported its chain's failure (an operator's panic, a
    /// build or snapshot error): its words.
    #[error("{0}")]
    Failed(String),
    /// The child did not answer within the start timeout.
    #[error("{what}: the process did not answer within {timeout:?}")]
    NoAnswer {
        /// `operator[instance] incarnation N (process P)`.
        what: String,
        /// How long it was given.
        timeout: Duration,
    },
    /// The pipes broke the protocol or failed (a short or unknown
    /// message, a pipe's I/O error).
    #[error("{what}: {why}")]
    Protocol {
        /// `operator[instance] incarnation N (process P)`.
        what: String,
        /// What was wrong.
        why: String,
    },
}

/// Every child of the run, as it ended (for the report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRecord {
    /// The operator (the chain's head) and instance.
    pub operator: String,
    /// The operator's instance.
    pub instance: usize,
    /// The incarnation the child ran.
    pub incarnation: u64,
    /// Its process ID.
    pub pid: u32,
    /// `primary` or `standby`: the role the child last had.
    pub role: &'static str,
    /// How it ended (`None`: it did not end before the report).
    pub exit: Option<ChildExit>,
}

/// A failure of the child, raised in the driver's incarnation: a panic of
/// the operator as a panic (the hooks print it); a death as the failure it
/// is, reported at once, in one line, without the driver's backtrace. A
/// wait cut short because the incarnation was stopped is none: the port
/// finds out itself, and the child's output is never read again.
pub(crate) fn fail(e: IncarnationError) {
    match e {
        IncarnationError::Stopped => {}
        IncarnationError::ChildDied { ref stuck, .. } => {
            crate::runtime::panic::child_died(e.to_string(), stuck.clone())
        }
        e => panic!("{e}"),
    }
}

/// How a child ended, in words.
pub(crate) fn describe(exit: &ChildExit) -> String {
    match exit.exit {
        crate::sys::process::Exit::Code(c) => format!("exited with code {c}"),
        crate::sys::process::Exit::Signal { signal, .. } => {
            format!("was killed by {}", crate::sys::process::signal_name(signal))
        }
    }
}

/// The driver's chain of an incarnation under process isolation (see the
/// module docs).
pub(crate) struct RemoteChain<T> {
    link: Rc<RefCell<Link>>,
    ctx: Rc<TaskCtx>,
    /// The chain head's probe (faults run in the driver's injector).
    probe: Probe,
    head: usize,
    buf: Vec<u8>,
    /// The chain's end was called: every flush waits from now on.
    ended: bool,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T: Codec> RemoteChain<T> {
    pub(crate) fn new(
        link: Rc<RefCell<Link>>,
        ctx: Rc<TaskCtx>,
        probe: Probe,
        head: usize,
    ) -> Self {
        RemoteChain {
            link,
            ctx,
            probe,
            head,
            buf: Vec::with_capacity(256),
            ended: false,
            _t: std::marker::PhantomData,
        }
    }

    /// A failure of the child is the operator's: it panics here, in the
    /// incarnation's poll, as the operator would have in thread mode.
    fn check(&self, r: Result<(), IncarnationError>) {
        if let Err(e) = r {
            fail(e);
        }
    }

    fn send_buf(&mut self) {
        let r = self.link.borrow_mut().send(&self.buf, &self.ctx);
        self.check(r);
    }

    fn send_tag(&mut self, tag: u8) {
        self.buf.clear();
        self.buf.push(tag);
        self.send_buf();
    }

    fn send_u64(&mut self, tag: u8, v: u64) {
        self.buf.clear();
        self.buf.push(tag);
        self.buf.extend_from_slice(&v.to_le_bytes());
        self.send_buf();
    }

    fn sync(&mut self) {
        let r = self.link.borrow_mut().sync(&self.ctx);
        self.check(r);
    }

    /// The probe's action for record `id`, carried out where it belongs.
    fn fault(&mut self, id: crate::record::TupleId) {
        self.ctx.record.set(Some(id));
        let Some(p) = self.probe.as_mut() else { return };
        if self.ctx.muted.get() {
            return; // a hot standby's computation: faults are the primary's
        }
        let action = p.before(id);
        let remote = match action {
            ProbeAction::Continue => return,
            ProbeAction::Panic(m) => Fault::Panic(m),
            ProbeAction::Stall(d) => Fault::Stall(d),
            ProbeAction::StallForever => Fault::StallForever,
            ProbeAction::Delay(d) => Fault::Delay(d),
            ProbeAction::Die(death, m) => Fault::Die(death, m),
            // The driver's own business: the port's input, its heartbeat.
            other => {
                crate::runtime::probe::act_on_probe(other, id, &self.ctx, self.head);
                return;
            }
        };
        self.ctx.fault_tuple.set(Some(id));
        self.buf.clear();
        remote.encode(id, &mut self.buf);
        self.send_buf();
    }
}

impl<T: Codec> Collector<T> for RemoteChain<T> {
    fn collect(&mut self, rec: Record<T>) {
        self.fault(rec.id);
        self.buf.clear();
        encode_record(&mut self.buf, &rec);
        self.send_buf();
    }

    /// Does not wait: the task hands the child's replies on at every poll
    /// and polls again soon while any are outstanding (`Task::poll`), so
    /// the worker runs its other tasks meanwhile. After the end, it waits.
    fn flush(&mut self) {
        self.send_tag(R_FLUSH);
        if self.ended {
            self.sync();
            return;
        }
        let r = self.link.borrow_mut().post(&self.ctx);
        self.check(r);
    }

    fn end(&mut self) {
        self.ended = true;
        self.send_tag(R_END);
        self.sync();
    }

    fn barrier(&mut self, id: u64) {
        self.send_u64(R_BARRIER, id);
    }

    fn watermark(&mut self, wm: u64) {
        self.send_u64(R_WATERMARK, wm);
    }

    fn idle(&mut self) {
        self.send_tag(R_IDLE);
    }

    fn processing_time(&mut self, now: u64) {
        self.send_u64(R_PTIME, now);
    }

    fn open_chunk(&mut self, id: ChunkId) {
        self.buf.clear();
        encode_chunk(&mut self.buf, R_OPEN, id);
        self.send_buf();
    }

    fn close_chunk(&mut self) {
        self.send_tag(R_CLOSE);
        // Published now, so the child works on this chunk while the port
        // chooses the next; what it answered so far goes on to the tail.
        // The wait is the poll's flush (`Port::flush`, after every poll).
        let r = {
            let mut l = self.link.borrow_mut();
            l.req.commit();
            l.pump(&self.ctx)
        };
        self.check(r);
    }

    /// Waits until the child answered everything sent before: its outputs
    /// are handed to the tail now, under the mute they were computed
    /// under.
    fn settle(&mut self) {
        self.sync();
    }

    /// The chain's operators run in the child: the point's parts are sent
    /// to it, and it follows them into its own states.
    fn follow_point(
        &mut self,
        parts: &mut crate::operator::FollowParts,
    ) -> Result<bool, CheckpointError> {
        let r = {
            let mut l = self.link.borrow_mut();
            l.followed = None;
            let mut sent = Ok(());
            for (node, bytes) in parts.drain() {
                let mut head = vec![R_FOLLOW_PART];
                head.extend_from_slice(&(node as u64).to_le_bytes());
                sent = sent.and_then(|()| l.send_pieces(&head, &bytes, &self.ctx));
            }
            sent.and_then(|()| l.send(&[R_FOLLOW], &self.ctx))
                .and_then(|()| l.sync(&self.ctx))
        };
        self.check(r);
        match self.link.borrow_mut().followed.take() {
            Some(Ok(f)) => Ok(f),
            Some(Err(e)) => Err(CheckpointError::Delta(e)),
            // Stopped while waiting (the attempt ends, or the incarnation
            // is no longer wanted): no failure of its own; the copy is
            // given up.
            None => Ok(false),
        }
    }

    fn install_followed(&mut self) {
        self.send_tag(R_INSTALL);
        self.sync();
    }

    fn snapshot_chain(&mut self, parts: &mut ChainParts) -> Result<(), CheckpointError> {
        let r = {
            let mut l = self.link.borrow_mut();
            l.snap.clear();
            l.snap_done = false;
            let mut m = vec![R_SNAPSHOT];
            encode_capture(&mut m, &self.ctx.point_capture.get());
            l.send(&m, &self.ctx).and_then(|()| l.sync(&self.ctx))
        };
        self.check(r);
        let mut l = self.link.borrow_mut();
        if !l.snap_done {
            // Stopped while waiting: no state to stand for.
            return Err(CheckpointError::ChainFrame(format!(
                "{}: no snapshot (the incarnation was stopped)",
                l.what
            )));
        }
        for (node, over, state) in l.snap.drain(..) {
            parts.push((
                node,
                state.map(|b| {
                    let mut b = SnapshotBytes::from_payload(&b);
                    b.set_delta_over((over != 0).then_some(over));
                    StateCapture::Bytes(b)
                }),
            ));
        }
        Ok(())
    }
}

/// The chain's end in the driver for outputs of type `O`, decoding the
/// child's replies (see [`ReplyTail`]).
pub(crate) struct Deliver<O> {
    pub(crate) tail: Box<dyn Collector<O>>,
    pub(crate) codec: Arc<crate::runtime::standby::entry::CodecFns<O>>,
}

impl<O> ReplyTail for Deliver<O> {
    fn deliver(&mut self, msg: &[u8]) -> Result<(), String> {
        let (&tag, body) = msg.split_first().ok_or("an empty reply")?;
        match tag {
            R_RECORD => {
                let rec = decode_record(body, self.codec.decode)?;
                self.tail.collect(rec);
            }
            R_FLUSH => self.tail.flush(),
            R_END => self.tail.end(),
            R_BARRIER => self.tail.barrier(u64_at(body, 0)?),
            R_WATERMARK => self.tail.watermark(u64_at(body, 0)?),
            R_IDLE => self.tail.idle(),
            R_OPEN => self.tail.open_chunk(decode_chunk(body)?),
            R_CLOSE => self.tail.close_chunk(),
            t => return Err(format!("reply kind {t}")),
        }
        Ok(())
    }
}

/// Boxes a [`Deliver`] for the tail `tail` (a `Box<dyn Collector<O>>`).
pub(crate) fn deliver_to<O: 'static>(
    tail: AnyBox,
    codec: Arc<crate::runtime::standby::entry::CodecFns<O>>,
) -> Box<dyn ReplyTail> {
    Box::new(Deliver {
        tail: crate::runtime::graph::downcast::<Box<dyn Collector<O>>>(tail, "remote tail"),
        codec,
    })
}

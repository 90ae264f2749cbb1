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
//! ## Faults
//!
//! Probes (fault injection) run in the driver, so a fault fires once per
//! run however many children replay its record; what it does — a panic, a
//! stall, a process death — is carried out by the child, on the record.

pub(crate) mod child;
mod wire;

use crate::checkpoint::{CheckpointError, SnapshotBytes, StateCapture};
use crate::operator::{ChainParts, ChunkId, Collector};
use crate::record::Record;
use crate::runtime::graph::{AnyBox, Probe};
use crate::runtime::probe::ProbeAction;
use crate::runtime::task::TaskCtx;
use crate::standby::codec::Codec;
use crate::standby::decide::{Detector, Observation, Verdict, WorkerAt};
use crate::standby::pipe::{PipeReader, PipeWriter};
use crate::sys::process::{Child, ChildExit};
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

/// The driver's side of one child: its pipes and its process.
pub(crate) struct Link {
    req: PipeWriter,
    rep: PipeReader,
    child: Child,
    /// `operator[instance] incarnation N (pid P)`.
    pub(crate) what: String,
    tail: Option<Box<dyn ReplyTail>>,
    sent_sync: u64,
    seen_sync: u64,
    msg: Vec<u8>,
    /// A snapshot being received: its parts, and the one being filled.
    snap: Vec<(usize, Option<Vec<u8>>)>,
    snap_done: bool,
    /// The child reported a failure: its message.
    failed: Option<String>,
    /// The child answered at least once (it runs the job).
    started: bool,
    /// Requests were sent since the last sync.
    dirty: bool,
    /// Engine clock of the child's last sign of progress while requests
    /// were outstanding.
    progress_at: u64,
    /// Where the child's exit is reported when the link goes.
    pub(crate) record: ChildRecord,
    /// The child's status file (PID, role, operator, incarnation).
    status: std::path::PathBuf,
    pub(crate) children: Arc<std::sync::Mutex<Vec<ChildRecord>>>,
}

impl Link {
    pub(crate) fn new(
        req: PipeWriter,
        rep: PipeReader,
        child: Child,
        mut record: ChildRecord,
        children: Arc<std::sync::Mutex<Vec<ChildRecord>>>,
        status: std::path::PathBuf,
    ) -> Self {
        record.pid = child.pid();
        let l = Link {
            what: format!(
                "{}[{}] incarnation {} (process {})",
                record.operator,
                record.instance,
                record.incarnation,
                child.pid()
            ),
            req,
            rep,
            child,
            tail: None,
            sent_sync: 0,
            seen_sync: 0,
            msg: Vec::with_capacity(256),
            snap: Vec::new(),
            snap_done: false,
            failed: None,
            started: false,
            dirty: false,
            progress_at: 0,
            record,
            children,
            status,
        };
        l.write_status();
        l
    }

    /// Writes the status file (replaced whole: a reader never sees half).
    fn write_status(&self) {
        let text = format!(
            "pid {}\nrole {}\noperator {}\ninstance {}\nincarnation {}\n",
            self.record.pid,
            self.record.role,
            self.record.operator,
            self.record.instance,
            self.record.incarnation
        );
        let tmp = self.status.with_extension("status.tmp");
        let written = {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut f| f.write_all(text.as_bytes()))
        };
        if written.is_ok() {
            let _ = std::fs::rename(&tmp, &self.status);
        }
    }

    fn protocol(&self, why: impl Into<String>) -> IncarnationError {
        IncarnationError::Protocol {
            what: self.what.clone(),
            why: why.into(),
        }
    }

    fn died(&self, how: String) -> IncarnationError {
        IncarnationError::ChildDied {
            what: self.what.clone(),
            how,
        }
    }

    /// The failure the child reported, if it did.
    fn reported(&self) -> Result<(), IncarnationError> {
        match &self.failed {
            Some(m) => Err(IncarnationError::Failed(m.clone())),
            None => Ok(()),
        }
    }

    /// The incarnation claimed an epoch: its child runs the primary now.
    pub(crate) fn now_primary(&mut self) {
        if self.record.role != "primary" {
            self.record.role = "primary";
            self.write_status();
        }
    }

    /// `Err` (what happened) if the child exited.
    pub(crate) fn check_alive(&mut self) -> Result<(), IncarnationError> {
        if self.record.exit.is_some() {
            return Ok(()); // closed, or already reported
        }
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(exit)) => {
                self.record.exit = Some(exit);
                Err(self.died(describe(&exit)))
            }
            Err(e) => Err(self.protocol(format!("watching the process: {e}"))),
        }
    }

    /// Stages `msg`, waiting (and taking replies) while the pipe is full.
    fn send(&mut self, msg: &[u8], ctx: &TaskCtx) -> Result<(), IncarnationError> {
        if !self.outstanding() {
            self.progress_at = ctx.clock.now();
        }
        self.dirty = true;
        if self.req.stage(msg) {
            return Ok(());
        }
        self.req.commit();
        let mut idle = Idle::new();
        loop {
            self.pump(ctx)?;
            if self.req.stage(msg) {
                return Ok(());
            }
            self.watch(ctx, &mut idle)?;
        }
    }

    /// Hands every reply received to the tail.
    fn pump(&mut self, ctx: &TaskCtx) -> Result<(), IncarnationError> {
        loop {
            let got = match self.rep.recv(&mut self.msg) {
                Ok(g) => g,
                Err(e) => return Err(self.protocol(format!("reply pipe: {e}"))),
            };
            if !got {
                return Ok(());
            }
            self.started = true;
            // The child works: a sign of life of the primary.
            ctx.tick();
            self.progress_at = ctx.clock.now();
            let msg = std::mem::take(&mut self.msg);
            let r = self.take_reply(&msg);
            self.msg = msg;
            r?;
        }
    }

    fn take_reply(&mut self, msg: &[u8]) -> Result<(), IncarnationError> {
        self.reply(msg).map_err(|why| self.protocol(why))
    }

    /// One reply (`Err`: how it broke the protocol).
    fn reply(&mut self, msg: &[u8]) -> Result<(), String> {
        let (&tag, body) = msg.split_first().ok_or("an empty reply")?;
        match tag {
            A_SYNCED => self.seen_sync = u64_at(body, 0)?,
            A_FAILED => {
                let m = String::from_utf8_lossy(body).into_owned();
                self.failed.get_or_insert(m);
            }
            A_SNAP_PART => {
                let node = u64_at(body, 0)? as usize;
                let present = *body.get(8).ok_or("a short snapshot part")? == 1;
                let bytes = &body[9..];
                match self.snap.last_mut() {
                    Some((n, Some(b))) if *n == node && present => b.extend_from_slice(bytes),
                    _ => self.snap.push((node, present.then(|| bytes.to_vec()))),
                }
            }
            A_SNAP_DONE => self.snap_done = true,
            A_READY => {}
            _ => match self.tail.as_mut() {
                Some(t) => t.deliver(msg)?,
                None => return Err("output before its chain was built".into()),
            },
        }
        Ok(())
    }

    /// Between two looks at the pipe: the child must be alive and the
    /// incarnation still wanted; then a pause that grows.
    fn watch(&mut self, ctx: &TaskCtx, idle: &mut Idle) -> Result<(), IncarnationError> {
        self.reported()?;
        if idle.check() {
            let waited = self.child.try_wait();
            let exited = waited.map_err(|e| self.protocol(format!("watching the process: {e}")))?;
            if let Some(exit) = exited {
                // Replies it published before it died still count.
                self.pump(ctx)?;
                self.reported()?;
                self.record.exit = Some(exit);
                return Err(self.died(describe(&exit)));
            }
            if ctx.shared.cancelled() || ctx.superseded() {
                return Err(IncarnationError::Stopped);
            }
            if !self.started && idle.since() > START_TIMEOUT {
                return Err(IncarnationError::NoAnswer {
                    what: self.what.clone(),
                    timeout: START_TIMEOUT,
                });
            }
        }
        idle.pause();
        Ok(())
    }

    /// Requests are not answered yet (or not even sent: staged).
    pub(crate) fn outstanding(&self) -> bool {
        self.dirty || self.seen_sync < self.sent_sync
    }

    /// Whether the child shows progress: nothing outstanding, or a reply
    /// within `timeout_ns` (a child that stopped answering — stopped,
    /// stalled — must not be covered by the driver's heartbeat).
    pub(crate) fn responsive(&self, now: u64, timeout_ns: u64) -> bool {
        !self.outstanding() || now.saturating_sub(self.progress_at) < timeout_ns
    }

    /// A child with requests outstanding that is stuck by the engine's one
    /// stall rule (`watch`, fed its replies as heartbeats and its main
    /// thread's samples: `standby::decide::judge`) is killed, and its
    /// incarnation fails as for any death. The driver's worker goes on
    /// polling while its child works, so the standby's detector, which
    /// watches workers, cannot see this stall.
    pub(crate) fn kill_if_stuck(
        &mut self,
        ctx: &TaskCtx,
        watch: &mut Detector,
    ) -> Result<(), IncarnationError> {
        if self.record.exit.is_some() || !self.outstanding() {
            return Ok(());
        }
        // What it answered while the task was not polled counts.
        self.pump(ctx)?;
        if !self.outstanding() {
            return Ok(());
        }
        let now = ctx.clock.now();
        let since = self.progress_at;
        let pid = self.child.pid();
        let o = Observation {
            now,
            beat: since,
            progress: 0,
            long_step: false,
        };
        let look = || {
            (
                WorkerAt::Primary { since },
                crate::sys::thread::sample_process(pid, now),
            )
        };
        let Verdict::Stalled(e) = watch.observe(o, look) else {
            return Ok(());
        };
        self.record.exit = self.child.kill().ok();
        Err(self.died(format!("answered nothing: killed as stuck ({e})")))
    }

    /// Sends a sync (if anything was sent since the last) without waiting
    /// for it, and hands on what the child answered so far.
    pub(crate) fn post(&mut self, ctx: &TaskCtx) -> Result<(), IncarnationError> {
        if self.dirty {
            self.post_sync(ctx)?;
        }
        self.pump(ctx)?;
        self.reported()
    }

    fn post_sync(&mut self, ctx: &TaskCtx) -> Result<u64, IncarnationError> {
        self.sent_sync += 1;
        let n = self.sent_sync;
        let mut m = [0u8; 9];
        m[0] = R_SYNC;
        m[1..].copy_from_slice(&n.to_le_bytes());
        self.send(&m, ctx)?;
        self.dirty = false;
        self.req.commit();
        Ok(n)
    }

    /// Sends a sync and waits until the child answered everything before.
    fn sync(&mut self, ctx: &TaskCtx) -> Result<(), IncarnationError> {
        let n = self.post_sync(ctx)?;
        let mut idle = Idle::new();
        loop {
            self.pump(ctx)?;
            self.reported()?;
            if self.seen_sync >= n {
                return Ok(());
            }
            self.watch(ctx, &mut idle)?;
        }
    }

    /// Builds the child's chain (from `state`, if any) and sets the tail
    /// its outputs go to.
    pub(crate) fn build(
        &mut self,
        state: Option<Vec<u8>>,
        tail: Box<dyn ReplyTail>,
        ctx: &TaskCtx,
    ) -> Result<(), IncarnationError> {
        self.tail = Some(tail);
        let mut m = Vec::with_capacity(PIECE + 1);
        if let Some(s) = &state {
            for piece in s.chunks(PIECE) {
                m.clear();
                m.push(R_BUILD_PART);
                m.extend_from_slice(piece);
                self.send(&m, ctx)?;
            }
        }
        self.send(&[R_BUILD, state.is_some() as u8], ctx)?;
        self.sync(ctx)
    }

    /// Asks the child to end, and reaps it (killing it if it does not end
    /// at once); records how it ended.
    pub(crate) fn close(&mut self) {
        if self.record.exit.is_none() {
            if self.req.stage(&[R_STOP]) {
                self.req.commit();
            }
            let exit = match self.child.wait_timeout(Duration::from_millis(100)) {
                Ok(Some(e)) => Some(e),
                _ => self.child.kill().ok(),
            };
            self.record.exit = exit;
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
        let _ = std::fs::remove_file(&self.status);
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.record.clone());
    }
}

/// A failure of the child, raised in the driver's incarnation: a panic of
/// the operator as a panic (the hooks print it); a death as the failure it
/// is, reported at once, in one line, without the driver's backtrace. A
/// wait cut short because the incarnation was stopped is none: the port
/// finds out itself, and the child's output is never read again.
pub(crate) fn fail(e: IncarnationError) {
    match e {
        IncarnationError::Stopped => {}
        IncarnationError::ChildDied { .. } => crate::runtime::panic::child_died(e.to_string()),
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

/// Spin, then yield: a wait for another process that costs little when it
/// answers at once.
struct Idle {
    n: u32,
    since: std::time::Instant,
}

impl Idle {
    fn new() -> Self {
        Idle {
            n: 0,
            since: std::time::Instant::now(),
        }
    }

    /// Whether to look at slow things (the process, the epoch) now.
    fn check(&self) -> bool {
        self.n.is_multiple_of(64)
    }

    fn since(&self) -> Duration {
        self.since.elapsed()
    }

    /// Never sleeps: a primary waiting for its child is working, and the
    /// standby's detector reads a sleeping thread as a stuck one.
    fn pause(&mut self) {
        self.n = self.n.wrapping_add(1);
        if self.n < 64 {
            std::hint::spin_loop();
        } else {
            // The child may need this core.
            std::thread::yield_now();
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

    fn snapshot_chain(&mut self, parts: &mut ChainParts) -> Result<(), CheckpointError> {
        let r = {
            let mut l = self.link.borrow_mut();
            l.snap.clear();
            l.snap_done = false;
            l.send(&[R_SNAPSHOT], &self.ctx)
                .and_then(|()| l.sync(&self.ctx))
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
        for (node, state) in l.snap.drain(..) {
            parts.push((
                node,
                state.map(|b| StateCapture::Bytes(SnapshotBytes::from_payload(&b))),
            ));
        }
        Ok(())
    }
}

/// The chain's end in the driver for outputs of type `O`, decoding the
/// child's replies (see [`ReplyTail`]).
pub(crate) struct Deliver<O> {
    pub(crate) tail: Box<dyn Collector<O>>,
    pub(crate) codec: Arc<crate::runtime::standby::kit::CodecFns<O>>,
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
    codec: Arc<crate::runtime::standby::kit::CodecFns<O>>,
) -> Box<dyn ReplyTail> {
    Box::new(Deliver {
        tail: crate::runtime::graph::downcast::<Box<dyn Collector<O>>>(tail, "remote tail"),
        codec,
    })
}

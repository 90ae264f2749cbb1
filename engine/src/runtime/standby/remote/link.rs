//! The driver's side of one child (process isolation): its pipes, its
//! process and status file, the replies handed to the chain's end, and the
//! waits — for an answer, a sync, a snapshot — that watch the child while
//! they spin.

use super::{
    describe, u64_at, ChildRecord, IncarnationError, ReplyTail, A_FAILED, A_FOLLOWED, A_READY,
    A_SNAP_DONE, A_SNAP_PART, A_SYNCED, PIECE, R_BUILD, R_BUILD_PART, R_STOP, R_SYNC,
    START_TIMEOUT,
};
use crate::runtime::task::TaskCtx;
use crate::standby::decide::{Detector, Observation, Verdict, WorkerAt};
use crate::standby::pipe::{PipeReader, PipeWriter};
use crate::sys::process::Child;
use std::sync::Arc;
use std::time::Duration;

/// The driver's side of one child: its pipes and its process.
pub(crate) struct Link {
    pub(super) req: PipeWriter,
    pub(super) rep: PipeReader,
    pub(super) child: Child,
    /// `operator[instance] incarnation N (pid P)`.
    pub(crate) what: String,
    pub(super) tail: Option<Box<dyn ReplyTail>>,
    pub(super) sent_sync: u64,
    pub(super) seen_sync: u64,
    pub(super) msg: Vec<u8>,
    /// A snapshot being received: its parts (node, the point a delta is
    /// over or 0, the bytes), the last one being filled.
    pub(super) snap: Vec<(usize, u64, Option<Vec<u8>>)>,
    pub(super) snap_done: bool,
    /// The answer to the last point to follow (`Err`: why it did not
    /// apply).
    pub(super) followed: Option<Result<bool, String>>,
    /// The child reported a failure: its message.
    pub(super) failed: Option<String>,
    /// The child answered at least once (it runs the job).
    pub(super) started: bool,
    /// Requests were sent since the last sync.
    pub(super) dirty: bool,
    /// Engine clock of the child's last sign of progress while requests
    /// were outstanding.
    pub(super) progress_at: u64,
    /// Where the child's exit is reported when the link goes.
    pub(crate) record: ChildRecord,
    /// The child's status file (PID, role, operator, incarnation).
    pub(super) status: std::path::PathBuf,
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
            followed: None,
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
    pub(super) fn write_status(&self) {
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

    pub(super) fn protocol(&self, why: impl Into<String>) -> IncarnationError {
        IncarnationError::Protocol {
            what: self.what.clone(),
            why: why.into(),
        }
    }

    pub(super) fn died(&self, how: String) -> IncarnationError {
        IncarnationError::ChildDied {
            what: self.what.clone(),
            how,
            stuck: None,
        }
    }

    /// The failure the child reported, if it did.
    pub(super) fn reported(&self) -> Result<(), IncarnationError> {
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

    /// Whether the child's end is not known yet.
    pub(crate) fn alive(&self) -> bool {
        self.record.exit.is_none()
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
    pub(super) fn send(&mut self, msg: &[u8], ctx: &TaskCtx) -> Result<(), IncarnationError> {
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
    pub(super) fn pump(&mut self, ctx: &TaskCtx) -> Result<(), IncarnationError> {
        let mut got_any = false;
        let r = loop {
            let got = match self.rep.recv(&mut self.msg) {
                Ok(g) => g,
                Err(e) => break Err(self.protocol(format!("reply pipe: {e}"))),
            };
            if !got {
                break Ok(());
            }
            got_any = true;
            // The child works: a sign of life of the primary.
            ctx.tick();
            let msg = std::mem::take(&mut self.msg);
            let r = self.take_reply(&msg);
            self.msg = msg;
            if r.is_err() {
                break r;
            }
        };
        if got_any {
            // One reading of the clock for what this look found.
            self.started = true;
            self.progress_at = ctx.clock.now();
        }
        r
    }

    pub(super) fn take_reply(&mut self, msg: &[u8]) -> Result<(), IncarnationError> {
        self.reply(msg).map_err(|why| self.protocol(why))
    }

    /// One reply (`Err`: how it broke the protocol).
    pub(super) fn reply(&mut self, msg: &[u8]) -> Result<(), String> {
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
                let over = u64_at(body, 9)?;
                let bytes = &body[17..];
                match self.snap.last_mut() {
                    Some((n, _, Some(b))) if *n == node && present => b.extend_from_slice(bytes),
                    _ => self
                        .snap
                        .push((node, over, present.then(|| bytes.to_vec()))),
                }
            }
            A_FOLLOWED => {
                self.followed = Some(match body.split_first() {
                    Some((1, _)) => Ok(true),
                    Some((0, _)) => Ok(false),
                    Some((_, why)) => Err(String::from_utf8_lossy(why).into_owned()),
                    None => return Err("a short answer to a point to follow".into()),
                });
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
        Err(IncarnationError::ChildDied {
            what: self.what.clone(),
            how: format!("answered nothing: killed as stuck ({e})"),
            stuck: Some(e.to_string()),
        })
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

    pub(super) fn post_sync(&mut self, ctx: &TaskCtx) -> Result<u64, IncarnationError> {
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
    pub(super) fn sync(&mut self, ctx: &TaskCtx) -> Result<(), IncarnationError> {
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
        if let Some(s) = &state {
            self.send_pieces(&[R_BUILD_PART], s, ctx)?;
        }
        self.send(&[R_BUILD, state.is_some() as u8], ctx)?;
        self.sync(ctx)
    }

    /// Sends `bytes` in messages of at most [`PIECE`] bytes, each after
    /// `head` (its kind and fields).
    pub(super) fn send_pieces(
        &mut self,
        head: &[u8],
        bytes: &[u8],
        ctx: &TaskCtx,
    ) -> Result<(), IncarnationError> {
        let mut m = Vec::with_capacity(head.len() + PIECE.min(bytes.len()));
        for piece in bytes.chunks(PIECE) {
            m.clear();
            m.extend_from_slice(head);
            m.extend_from_slice(piece);
            self.send(&m, ctx)?;
        }
        Ok(())
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

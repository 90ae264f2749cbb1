//! The child's side of process isolation: the entry point a child takes
//! instead of running the job, its chain, and the end of that chain that
//! writes into the reply pipe.
//!
//! A child is the driver's own executable started again, with its role in
//! the environment ([`ROLE`] and the variables beside it). Its `main` runs
//! as the driver's did up to [`crate::Job::start`], which finds the role
//! and serves the incarnation instead; it never returns to `main`. The job
//! the child built must be the driver's: the operators' names and
//! parallelism, hashed, must match what the driver passed, or the child
//! ends with an error before it reads anything.

use super::wire::*;
use super::{Fault, RequestHead};
use crate::checkpoint::CheckpointError;
use crate::operator::{ChainParts, Collector};
use crate::record::Record;
use crate::runtime::graph::{Graph, NodeKind};
use crate::runtime::standby::entry::CodecFns;
use crate::runtime::task::TaskCtx;
use crate::standby::codec::Codec;
use crate::standby::pipe::{PipeReader, PipeWriter};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The environment variable that makes a process an incarnation's child:
/// `NODE INSTANCE INCARNATION ATTEMPT ORIGIN_NS JOB_HASH MEMBERS` (members
/// comma-separated, the chain's nodes in order).
pub(crate) const ROLE: &str = "TANDEM_INCARNATION";
/// The request pipe's path (the reply pipe's is beside it, `.rep`).
pub(crate) const PIPES: &str = "TANDEM_INCARNATION_PIPES";
/// The driver's PID: the child dies with it.
pub(crate) const PARENT: &str = "TANDEM_INCARNATION_PARENT";
/// The core the child pins itself to: one no worker of its driver is
/// pinned to (absent: the child runs where the scheduler puts it).
pub(crate) const CORE: &str = "TANDEM_INCARNATION_CORE";

/// A child's role, as the driver wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Role {
    pub(crate) node: usize,
    pub(crate) instance: usize,
    pub(crate) inc: u64,
    pub(crate) attempt: u32,
    pub(crate) origin_ns: u64,
    pub(crate) job: u64,
    pub(crate) members: Vec<usize>,
    /// The driver's sources pinned by the restore point it started from
    /// (`Graph::pinned`): the child builds the same graph.
    pub(crate) pins: Vec<(usize, usize)>,
    /// The request pipe (the reply pipe: the same path with `.rep`).
    pub(crate) pipes: PathBuf,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} instance {}, incarnation {} of attempt {}",
            self.node, self.instance, self.inc, self.attempt
        )
    }
}

impl Role {
    pub(crate) fn env(&self) -> String {
        let m: Vec<String> = self.members.iter().map(|m| m.to_string()).collect();
        let pins: Vec<String> = self.pins.iter().map(|(n, p)| format!("{n}:{p}")).collect();
        format!(
            "{} {} {} {} {} {} {} {}",
            self.node,
            self.instance,
            self.inc,
            self.attempt,
            self.origin_ns,
            self.job,
            m.join(","),
            if pins.is_empty() {
                "-".to_string()
            } else {
                pins.join(",")
            }
        )
    }

    fn parse(s: &str, pipes: PathBuf) -> Result<Role, String> {
        let f: Vec<&str> = s.split(' ').collect();
        let bad = || format!("{ROLE}={s:?} is not an incarnation's role");
        if f.len() != 8 {
            return Err(bad());
        }
        let pin = |s: &str| -> Option<(usize, usize)> {
            let (n, p) = s.split_once(':')?;
            Some((n.parse().ok()?, p.parse().ok()?))
        };
        let n = |i: usize| f[i].parse::<u64>().map_err(|_| bad());
        Ok(Role {
            node: n(0)? as usize,
            instance: n(1)? as usize,
            inc: n(2)?,
            attempt: n(3)? as u32,
            origin_ns: n(4)?,
            job: n(5)?,
            members: f[6]
                .split(',')
                .map(|m| m.parse::<usize>().map_err(|_| bad()))
                .collect::<Result<_, _>>()?,
            pins: match f[7] {
                "-" => Vec::new(),
                p => p
                    .split(',')
                    .map(|s| pin(s).ok_or_else(bad))
                    .collect::<Result<_, _>>()?,
            },
            pipes,
        })
    }

    /// The reply pipe's path.
    pub(crate) fn reply_path(req: &std::path::Path) -> PathBuf {
        req.with_extension("rep")
    }
}

/// This process's role, if it was started as an incarnation's child.
pub(crate) fn role() -> Option<Result<Role, String>> {
    let s = std::env::var(ROLE).ok()?;
    let pipes = std::env::var_os(PIPES)?;
    Some(Role::parse(&s, PathBuf::from(pipes)))
}

/// Whether this process is an incarnation's child (its `main` may skip
/// what only the driver should do: write output, remove files).
pub fn is_incarnation_process() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// A job's identity for a child: its operators' names and parallelism.
pub(crate) fn job_hash(graph: &Graph) -> u64 {
    // FNV-1a: stable across processes and builds.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= x as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    eat(graph.name.as_bytes());
    for n in &graph.nodes {
        eat(n.name.as_bytes());
        eat(&(n.parallelism as u64).to_le_bytes());
    }
    h >> 1
}

/// What builds the chain `role.members` names, from `state` (a recovery
/// point's archive) if given, ending in the reply pipe: the standby's typed
/// builders ([`crate::runtime::standby::kit::child_chain`]), handed in by
/// the caller so that this side of process isolation needs none of them.
pub(crate) type ChildChain = fn(
    &Graph,
    &Role,
    &Rc<TaskCtx>,
    Option<Vec<u8>>,
    Rc<RefCell<Replies>>,
) -> Result<Box<dyn RequestHead>, String>;

/// Serves the incarnation `role` names, its chain built by `build`, and
/// ends the process: 0 when the driver said stop, 70 on an error (on
/// standard error first).
pub(crate) fn run(graph: &Arc<Graph>, role: Result<Role, String>, build: ChildChain) -> ! {
    // First: die with the driver (it started this process without arming
    // the signal, to start it without copying its page tables).
    let parent = std::env::var(PARENT)
        .ok()
        .and_then(|p| p.parse::<u32>().ok());
    if let Err(e) = parent
        .ok_or_else(|| std::io::Error::other(format!("no {PARENT}")))
        .and_then(crate::sys::process::die_with_parent)
    {
        eprintln!("tandem: incarnation process {}: {e}", std::process::id());
        std::process::exit(70);
    }
    if let Some(core) = std::env::var(CORE).ok().and_then(|c| c.parse().ok()) {
        // Best effort, as a worker's pin: refused, it runs unpinned.
        let _ = crate::sys::affinity::pin_current_thread(core);
    }
    // The driver reports the chain's panics; the child stays quiet.
    std::panic::set_hook(Box::new(|_| {}));
    let r = role.and_then(|role| {
        let pinned;
        let graph = if role.pins.is_empty() {
            graph
        } else {
            pinned = Arc::new(graph.pinned_to(&role.pins)?);
            &pinned
        };
        serve(graph, &role, build).map_err(|e| format!("{e} ({role})"))
    });
    match r {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("tandem: incarnation process {}: {e}", std::process::id());
            std::process::exit(70)
        }
    }
}

/// The replies the child writes, staged until a sync or an idle moment.
pub(crate) struct Replies {
    pipe: PipeWriter,
    buf: Vec<u8>,
}

impl Replies {
    /// Stages `self.buf` as a message, waiting while the pipe is full (the
    /// driver takes replies whenever it waits; if it died, the parent-death
    /// signal ends this process).
    fn send_buf(&mut self) {
        if self.pipe.stage(&self.buf) {
            return;
        }
        self.pipe.commit();
        let mut n = 0u32;
        while !self.pipe.stage(&self.buf) {
            pause(&mut n);
        }
    }

    fn send(&mut self, msg: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(msg);
        self.send_buf();
    }

    fn send_u64(&mut self, tag: u8, v: u64) {
        self.buf.clear();
        self.buf.push(tag);
        self.buf.extend_from_slice(&v.to_le_bytes());
        self.send_buf();
    }

    fn commit(&mut self) {
        self.pipe.commit();
    }
}

/// Waits a little for the driver: spins briefly, then sleeps longer and
/// longer (20 µs doubling to 1 ms). A child shares the cores with the
/// driver's workers: one that spun or yielded while it waits would take
/// their time (and a starved worker misses its heartbeats).
fn pause(n: &mut u32) {
    *n = n.saturating_add(1);
    if *n < 200 {
        std::hint::spin_loop();
    } else {
        let k = (*n - 200).min(6);
        std::thread::sleep(Duration::from_micros(20 << k).min(Duration::from_millis(1)));
    }
}

/// The end of the child's chain: every call becomes a reply.
pub(crate) struct ReplyCollector<O> {
    out: Rc<RefCell<Replies>>,
    codec: Arc<CodecFns<O>>,
}

impl<O> ReplyCollector<O> {
    pub(crate) fn new(out: Rc<RefCell<Replies>>, codec: Arc<CodecFns<O>>) -> Self {
        ReplyCollector { out, codec }
    }
}

impl<O> Collector<O> for ReplyCollector<O> {
    fn collect(&mut self, rec: Record<O>) {
        let mut o = self.out.borrow_mut();
        let mut buf = std::mem::take(&mut o.buf);
        buf.clear();
        encode_record_with(&mut buf, &rec, self.codec.encode);
        o.buf = buf;
        o.send_buf();
    }
    fn flush(&mut self) {
        self.out.borrow_mut().send(&[R_FLUSH]);
    }
    fn end(&mut self) {
        self.out.borrow_mut().send(&[R_END]);
    }
    fn barrier(&mut self, id: u64) {
        self.out.borrow_mut().send_u64(R_BARRIER, id);
    }
    fn watermark(&mut self, wm: u64) {
        self.out.borrow_mut().send_u64(R_WATERMARK, wm);
    }
    fn idle(&mut self) {
        self.out.borrow_mut().send(&[R_IDLE]);
    }
    fn open_chunk(&mut self, id: crate::operator::ChunkId) {
        let mut o = self.out.borrow_mut();
        o.buf.clear();
        encode_chunk(&mut o.buf, R_OPEN, id);
        o.send_buf();
    }
    fn close_chunk(&mut self) {
        self.out.borrow_mut().send(&[R_CLOSE]);
    }
}

/// The head of the child's chain, for input type `T`.
pub(crate) struct ChildHead<T> {
    pub(crate) chain: Box<dyn Collector<T>>,
}

impl<T: Codec> RequestHead for ChildHead<T> {
    fn deliver(&mut self, tag: u8, body: &[u8]) -> Result<(), String> {
        let c = &mut self.chain;
        match tag {
            R_RECORD => c.collect(decode_record(body, T::decode)?),
            R_FLUSH => c.flush(),
            R_END => c.end(),
            R_BARRIER => c.barrier(u64_at(body, 0)?),
            R_WATERMARK => c.watermark(u64_at(body, 0)?),
            R_IDLE => c.idle(),
            R_PTIME => c.processing_time(u64_at(body, 0)?),
            R_OPEN => c.open_chunk(decode_chunk(body)?),
            R_CLOSE => c.close_chunk(),
            t => return Err(format!("request kind {t}")),
        }
        Ok(())
    }

    fn snapshot(&mut self, parts: &mut ChainParts) -> Result<(), CheckpointError> {
        self.chain.snapshot_chain(parts)
    }

    fn follow(
        &mut self,
        parts: &mut crate::operator::FollowParts,
    ) -> Result<bool, CheckpointError> {
        self.chain.follow_point(parts)
    }

    fn install(&mut self) {
        self.chain.install_followed()
    }
}

/// The job this process built is its driver's, and the chain's members are
/// one-input operators.
fn check_job(graph: &Graph, role: &Role) -> Result<(), String> {
    let ours = job_hash(graph);
    if ours != role.job {
        return Err(format!(
            "this process built another job (`{}`, hash {ours}) than its driver's (hash {}): \
             a program that runs jobs under process isolation must build the same job in \
             every process",
            graph.name, role.job
        ));
    }
    for &m in &role.members {
        match graph.nodes.get(m).map(|n| &n.kind) {
            Some(NodeKind::Unary(_)) => {}
            _ => return Err(format!("chain member {m} is not a one-input operator")),
        }
    }
    Ok(())
}

/// The chain's snapshot, sent as `A_SNAP_PART`s (`Err`: what failed).
fn snapshot(
    head: Option<&mut Box<dyn RequestHead>>,
    replies: &Rc<RefCell<Replies>>,
) -> Result<(), String> {
    let h = head.ok_or("a snapshot before the chain was built")?;
    let mut parts = ChainParts::new();
    match catch_unwind(AssertUnwindSafe(|| h.snapshot(&mut parts))) {
        Ok(Ok(())) => send_parts(replies, parts),
        Ok(Err(e)) => Err(format!("standby snapshot: {e}")),
        Err(p) => Err(crate::runtime::panic::panic_message(p.as_ref())),
    }
}

/// Carries out an injected fault on the record the driver's probe chose
/// (`Err`: the operator's panic, as a failure to report).
fn carry_out(f: Fault, replies: &Rc<RefCell<Replies>>) -> Result<(), String> {
    match f {
        Fault::Panic(m) => return Err(m),
        Fault::Stall(d) => std::thread::sleep(d),
        // Until the driver, which fenced the incarnation or stopped the
        // attempt, kills this process.
        Fault::StallForever => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
        Fault::Delay(d) => {
            let until = std::time::Instant::now() + d;
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        Fault::Die(death, m) => {
            // What it answered so far reaches the driver, as a real death
            // would leave it.
            replies.borrow_mut().commit();
            crate::sys::process::die(death, &m)
        }
    }
    Ok(())
}

fn serve(graph: &Arc<Graph>, role: &Role, build: ChildChain) -> Result<(), String> {
    check_job(graph, role)?;
    let mut req = PipeReader::open(&role.pipes).map_err(|e| e.to_string())?;
    let rep = PipeWriter::open(&Role::reply_path(&role.pipes)).map_err(|e| e.to_string())?;
    let replies = Rc::new(RefCell::new(Replies {
        pipe: rep,
        buf: Vec::with_capacity(256),
    }));
    let origin = crate::sys::clock::Origin::from_monotonic_ns(role.origin_ns);
    let shared = Arc::new(crate::runtime::child_shared(origin, graph));
    let ctx = Rc::new(TaskCtx::new(
        role.instance,
        role.node,
        0,
        Arc::clone(&shared),
        Rc::default(),
    ));
    ctx.incarnation.set(role.inc);
    replies.borrow_mut().send(&[A_READY]);
    replies.borrow_mut().commit();

    let mut head: Option<Box<dyn RequestHead>> = None;
    let mut state: Vec<u8> = Vec::new();
    let mut follow = crate::operator::FollowParts::new();
    let mut failed = false;
    let mut msg = Vec::with_capacity(256);
    let mut idle = 0u32;
    loop {
        if !req.recv(&mut msg).map_err(|e| e.to_string())? {
            replies.borrow_mut().commit();
            pause(&mut idle);
            continue;
        }
        idle = 0;
        let (&tag, body) = msg.split_first().ok_or("an empty request")?;
        let fail = |m: String, failed: &mut bool| {
            if !std::mem::replace(failed, true) {
                let mut r = replies.borrow_mut();
                r.buf.clear();
                r.buf.push(A_FAILED);
                r.buf.extend_from_slice(m.as_bytes());
                r.send_buf();
                r.commit();
            }
        };
        match tag {
            R_STOP => {
                replies.borrow_mut().commit();
                return Ok(());
            }
            R_SYNC => {
                if let Some(e) = shared.take_error() {
                    fail(e.to_string(), &mut failed);
                }
                let mut r = replies.borrow_mut();
                r.send_u64(A_SYNCED, u64_at(body, 0)?);
                r.commit();
            }
            _ if failed => {}
            R_BUILD_PART => state.extend_from_slice(body),
            R_BUILD => {
                head = None;
                let st = (body.first() == Some(&1)).then(|| std::mem::take(&mut state));
                state.clear();
                match catch_unwind(AssertUnwindSafe(|| {
                    build(graph, role, &ctx, st, Rc::clone(&replies))
                })) {
                    Ok(Ok(h)) => head = Some(h),
                    Ok(Err(e)) => fail(e, &mut failed),
                    Err(p) => fail(
                        crate::runtime::panic::panic_message(p.as_ref()),
                        &mut failed,
                    ),
                }
            }
            R_SNAPSHOT => {
                // A recovery point's capture: a delta over the point the
                // following standby's copy is at, or whole.
                ctx.point_capture.set(decode_capture(body)?);
                let r = snapshot(head.as_mut(), &replies);
                ctx.point_capture
                    .set(crate::state::delta::CaptureFor::whole());
                if let Err(e) = r {
                    fail(e, &mut failed);
                }
            }
            R_FOLLOW_PART => {
                let node = u64_at(body, 0)? as usize;
                follow
                    .entry(node)
                    .or_default()
                    .extend_from_slice(&body[8..]);
            }
            R_FOLLOW => {
                let mut parts = std::mem::take(&mut follow);
                let r = match head.as_mut() {
                    None => Err("a point to follow before the chain was built".to_string()),
                    Some(h) => match catch_unwind(AssertUnwindSafe(|| h.follow(&mut parts))) {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(p) => Err(crate::runtime::panic::panic_message(p.as_ref())),
                    },
                };
                let mut rep = replies.borrow_mut();
                rep.buf.clear();
                rep.buf.push(A_FOLLOWED);
                match r {
                    Ok(f) => rep.buf.push(f as u8),
                    Err(e) => {
                        rep.buf.push(2);
                        rep.buf.extend_from_slice(e.as_bytes());
                    }
                }
                rep.send_buf();
            }
            R_INSTALL => {
                let Some(h) = head.as_mut() else {
                    fail("going live before the chain was built".into(), &mut failed);
                    continue;
                };
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| h.install())) {
                    fail(
                        crate::runtime::panic::panic_message(p.as_ref()),
                        &mut failed,
                    );
                }
            }
            R_FAULT => {
                let (id, f) = Fault::decode(body)?;
                ctx.record.set(Some(id));
                if let Err(m) = carry_out(f, &replies) {
                    fail(m, &mut failed);
                }
            }
            _ => {
                let Some(h) = head.as_mut() else {
                    fail(
                        format!("request {tag} before the chain was built"),
                        &mut failed,
                    );
                    continue;
                };
                match catch_unwind(AssertUnwindSafe(|| h.deliver(tag, body))) {
                    // A chunk's answers are published as it closes: the
                    // driver sees progress (and hands outputs on) as the
                    // chunks are done, not only at its next sync.
                    Ok(Ok(())) if tag == R_CLOSE => replies.borrow_mut().commit(),
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => fail(e, &mut failed),
                    Err(p) => fail(
                        crate::runtime::panic::panic_message(p.as_ref()),
                        &mut failed,
                    ),
                }
            }
        }
    }
}

/// The chain's states as `A_SNAP_PART` messages, then `A_SNAP_DONE`.
fn send_parts(replies: &Rc<RefCell<Replies>>, parts: ChainParts) -> Result<(), String> {
    let mut r = replies.borrow_mut();
    for (node, state) in parts {
        let bytes = match state {
            Some(s) => Some(s.archive().map_err(|e| format!("standby snapshot: {e}"))?),
            None => None,
        };
        let over = bytes.as_ref().and_then(|b| b.delta_over()).unwrap_or(0);
        let head = |r: &mut Replies, present: bool| {
            r.buf.clear();
            r.buf.push(A_SNAP_PART);
            r.buf.extend_from_slice(&(node as u64).to_le_bytes());
            r.buf.push(present as u8);
            r.buf.extend_from_slice(&over.to_le_bytes());
        };
        match bytes {
            None => {
                head(&mut r, false);
                r.send_buf();
            }
            Some(b) if b.is_empty() => {
                head(&mut r, true);
                r.send_buf();
            }
            Some(b) => {
                for piece in b.payload().chunks(super::PIECE) {
                    head(&mut r, true);
                    r.buf.extend_from_slice(piece);
                    r.send_buf();
                }
            }
        }
    }
    r.send(&[A_SNAP_DONE]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_reads_back_what_the_driver_wrote() {
        let r = Role {
            node: 3,
            instance: 1,
            inc: 7,
            attempt: 2,
            origin_ns: 123_456,
            job: 99,
            members: vec![3, 4, 5],
            pins: vec![(0, 2), (4, 1)],
            pipes: PathBuf::from("/dev/shm/x/a.req"),
        };
        assert_eq!(Role::parse(&r.env(), r.pipes.clone()).unwrap(), r);
        assert!(Role::parse("1 2 3", r.pipes.clone()).is_err());
        assert_eq!(
            Role::reply_path(&r.pipes),
            PathBuf::from("/dev/shm/x/a.rep")
        );
    }
}

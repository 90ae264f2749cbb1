//! One run of the benchmark: the job built and started, the state built
//! and covered (a checkpoint, or the standby's recovery points), the page
//! cache dropped, the fault armed and fired, the outputs after it checked,
//! and the recovery read from the job's report.

use std::{
    fs::OpenOptions,
    io::Write,
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use tandem::{
    CheckpointConfig, JobBuilder, JobHandle, JobReport, OperatorInfo, PanicOutput, RecoveryKind,
    RecoveryRecord, RestartStrategy, RuntimeConfig, StandbyConfig,
};
use tandem_bench::cli::interrupted;
use tandem_bench::errln;

use super::job::{Check, Count, Fault, Feed, Plan, Seen, Store};
use super::{ms, Args, Setup, Strategy, DROP_CACHES, FIRE_TIMEOUT, KEYED, POLL, RESTART_TIMEOUT};

/// One run's figures.
#[derive(Serialize, Debug, Clone)]
pub(crate) struct RunResult {
    pub(crate) run: usize,
    /// Fault → first record at a sink after the restart.
    pub(crate) first_output_ms: f64,
    /// Detection → every worker of the new attempt built and restored.
    pub(crate) restore_ms: f64,
    /// Fault → the supervisor noticed.
    pub(crate) detect_ms: f64,
    /// Fault → every sink consumed as many records as before the fault.
    pub(crate) caught_up_ms: Option<f64>,
    /// The restart-all's checkpoint (`None` under bqbs, which restores
    /// the standby's recovery point, or nothing when it follows).
    pub(crate) restored_checkpoint: Option<u64>,
    /// Payload bytes of `count`'s snapshot that the restore reads (its
    /// file and its chain), from the manifest.
    pub(crate) state_bytes: Option<u64>,
    /// Of those, the last whole archive's.
    pub(crate) whole_bytes: Option<u64>,
    /// Files the restore of `count` reads (1 + deltas' chain).
    pub(crate) state_files: Option<usize>,
    /// Those files' sizes on disk.
    pub(crate) file_bytes: Option<u64>,
    /// Payload bytes of every file of the restored checkpoint.
    pub(crate) checkpoint_bytes: Option<u64>,
    /// Records read again after the fault: the source's (restart-all),
    /// the buffer queue's (a takeover).
    pub(crate) replayed: u64,
    /// Keys (one insert each before the updates).
    pub(crate) keys: u64,
    /// Outputs checked after the restart.
    pub(crate) outputs_after_restart: u64,
    /// Whether the page cache was dropped before the fault.
    pub(crate) cold: bool,
    /// `sync` and the drop, in ms (not part of the recovery).
    pub(crate) sync_ms: f64,
    pub(crate) drop_ms: f64,
    /// Start → every key inserted (every insert's output at the sink).
    pub(crate) insert_s: f64,
    /// The whole run, start to report.
    pub(crate) run_s: f64,
}

/// One run in `dir` (a fresh scratch directory).
pub(crate) fn one_run(args: &Args, setup: &Setup, n: usize, dir: &Path) -> Result<RunResult> {
    let started = Instant::now();
    let plan = Plan::new(setup.keys);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen {
        first_after: AtomicU64::new(u64::MAX),
        ..Seen::default()
    });
    let fault = Fault {
        armed: Arc::new(AtomicBool::new(false)),
        fired: Arc::default(),
    };
    let (armed, fired) = (Arc::clone(&fault.armed), Arc::clone(&fault.fired));

    let job = JobBuilder::new("restore");
    let (stop2, seen2) = (Arc::clone(&stop), Arc::clone(&seen));
    let updates_from = Arc::new(OnceLock::new());
    let per_record = Duration::from_secs_f64(1.0 / args.rate as f64);
    let bqbs = args.strategy == Strategy::Bqbs;
    let feed = job.source("feed", move |_: &OperatorInfo| Feed {
        plan,
        next: 0,
        per_record,
        updates_from: Arc::clone(&updates_from),
        stop: Arc::clone(&stop2),
    });
    // Under bqbs, `count` (the operator after this stream) has a standby.
    let feed = if bqbs { feed.standby() } else { feed };
    feed.key_by(|r: &(u64, u64)| r.1)
        .process(KEYED, |_| Count)
        .parallelism(1)
        .sink("check", move |info: &OperatorInfo| Check {
            plan,
            attempt: info.attempt,
            next: None,
            seen: Arc::clone(&seen2),
        });

    let store_dir = dir.join("checkpoints");
    let mut cp = CheckpointConfig::every(Duration::from_millis(args.checkpoint_interval_ms));
    cp.dir = Some(store_dir.clone());
    if args.whole_checkpoints {
        cp.incremental = None;
    }
    let cfg = RuntimeConfig::default().run_dir(dir.join("run"));
    let cfg = if bqbs {
        cfg.standby(StandbyConfig {
            follow: args.standby_follow,
            // A takeover for a stall would spoil the run as a restart
            // would (see --heartbeat-timeout-ms); the panic is seen at once.
            heartbeat_timeout: Duration::from_millis(
                args.standby_heartbeat_ms
                    .unwrap_or(args.heartbeat_timeout_ms),
            ),
            ..StandbyConfig::default()
        })
    } else {
        cfg.checkpoint(cp)
    };
    let cfg = cfg
        .restart(RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::ZERO,
        })
        .heartbeat_timeout(Duration::from_millis(args.heartbeat_timeout_ms))
        // The hook installed before the engine's prints the fault (see
        // `real_main`): at once, in one line.
        .panic_output(PanicOutput::Chained)
        .probes(Arc::new(fault));
    let handle = job.build()?.start(&cfg)?;
    let mut store = Store {
        dir: store_dir,
        seen: Default::default(),
    };
    let mut job = Running {
        handle: Some(handle),
    };

    // 1. Every key inserted, then a checkpoint that covers them all (the
    // next but one after the last insert at the latest) — under bqbs, two
    // more recovery points after the last insert (the second begun after
    // it), and with --standby-follow three more applied by the standby:
    // it applies what the inserts wrote at about the rate they were made,
    // in deltas that each take as long to apply as the inserts they hold
    // took to make, and the primary takes no point while one is applied;
    // the third is small, and comes once the copy has caught up (a fault
    // before that would apply the rest at the takeover, or replay the
    // records since a point taken long before).
    let covering_timeout =
        Duration::from_millis(args.checkpoint_interval_ms) * 10 + Duration::from_secs(120);
    let mut insert_s = None;
    let mut points_then = None;
    let covering = loop {
        job.check()?;
        if insert_s.is_none() && seen.before.load(Ordering::Acquire) >= setup.keys {
            insert_s = Some(started.elapsed().as_secs_f64());
            points_then = job.points();
            errln!(
                "run {n}: {} keys inserted in {:.1} s; waiting for a {} that covers them",
                setup.keys,
                started.elapsed().as_secs_f64(),
                if bqbs { "recovery point" } else { "checkpoint" }
            );
        }
        if bqbs {
            if let (Some(then), Some(now)) = (points_then, job.points()) {
                let (published, followed) = (now.0 >= then.0 + 2, now.1 >= then.1 + 3);
                if published && (followed || !args.standby_follow) {
                    break None;
                }
            }
        } else {
            store.look()?;
            if let Some((id, c)) = store.covering(setup.keys) {
                break Some((id, c.clone()));
            }
        }
        if let Some(s) = insert_s {
            let waited = started.elapsed().as_secs_f64() - s;
            ensure!(
                waited < covering_timeout.as_secs_f64(),
                "run {n}: {waited:.0} s after the last insert, no {} covers every key \
                 (checkpoints published: {:?}; recovery points: {:?} then, {:?} now)",
                if bqbs { "recovery point" } else { "checkpoint" },
                store.seen.keys().collect::<Vec<_>>(),
                points_then,
                job.points()
            );
        }
        std::thread::sleep(POLL);
    };
    let insert_s = insert_s.unwrap_or(started.elapsed().as_secs_f64());

    // 2. Cold: sync and drop the page cache here, before the fault.
    let (mut sync_ms, mut drop_ms) = (0.0, 0.0);
    if setup.cold {
        let t = Instant::now();
        // SAFETY: `sync` takes no arguments and cannot fail.
        unsafe { libc::sync() };
        sync_ms = ms(t.elapsed());
        let t = Instant::now();
        OpenOptions::new()
            .write(true)
            .open(DROP_CACHES)
            .and_then(|mut f| f.write_all(b"3\n"))
            .with_context(|| format!("--cold: writing 3 to {DROP_CACHES}"))?;
        drop_ms = ms(t.elapsed());
    }

    // 3. The fault: the next record of `count` panics.
    armed.store(true, Ordering::Release);
    let armed_at = Instant::now();
    let tuple = loop {
        job.check()?;
        if let Some(t) = *fired.lock().unwrap_or_else(|p| p.into_inner()) {
            break t;
        }
        ensure!(
            armed_at.elapsed() < FIRE_TIMEOUT,
            "the fault armed {} s ago has not fired: `{KEYED}` takes no records",
            FIRE_TIMEOUT.as_secs()
        );
        std::thread::sleep(POLL);
    };
    let newest_at_fault = store.seen.keys().next_back().copied();
    // Under bqbs the attempt goes on: outputs after the fault's are counted
    // from here (the takeover's replay is deduplicated, not output again).
    let before_fault = seen.before.load(Ordering::Acquire);

    // 4. The restarted attempt's outputs — its replay, then as many new
    // ones as asked — then the end of input.
    let fault_at = Instant::now();
    let done = || {
        if bqbs {
            return seen.before.load(Ordering::Acquire)
                >= before_fault.saturating_add(args.outputs_after_restart);
        }
        let first = seen.first_after.load(Ordering::Acquire);
        let replay = seen.before.load(Ordering::Acquire).saturating_sub(first);
        first != u64::MAX
            && seen.after.load(Ordering::Acquire) >= replay + args.outputs_after_restart
    };
    while !done() {
        job.check()?;
        store.look()?;
        ensure!(
            fault_at.elapsed() < RESTART_TIMEOUT,
            "{} s after the fault (on record {tuple}), the restarted job has produced {} outputs, \
             not yet its replay and {} more",
            RESTART_TIMEOUT.as_secs(),
            seen.after.load(Ordering::Acquire),
            args.outputs_after_restart
        );
        std::thread::sleep(POLL);
    }
    stop.store(true, Ordering::Release);
    let report = job.join()?;
    let run_s = started.elapsed().as_secs_f64();

    // 5. Every output right, one restart-all, from a covering checkpoint.
    let wrong = seen.wrong.load(Ordering::Acquire);
    if wrong > 0 {
        let first = seen
            .first_wrong
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        bail!("run {n}: {wrong} wrong outputs; the first: {first}");
    }
    let kind = if bqbs {
        RecoveryKind::Takeover
    } else {
        RecoveryKind::RestartAll
    };
    let rec = the_recovery(&report, n, kind)?;
    let restored = match covering {
        None => None,
        Some((covering, covered)) => {
            let id = rec
                .restored_checkpoint
                .with_context(|| format!("run {n}: the restart restored no checkpoint: {rec:?}"))?;
            let c = match store.seen.get(&id) {
                Some(c) => c.clone(),
                None => bail!(
                    "run {n}: the restart restored checkpoint {id}, whose manifest this run never read \
                     (newest read at the fault: {newest_at_fault:?})"
                ),
            };
            ensure!(
                c.position >= setup.keys && id >= covering,
                "run {n}: the restart restored checkpoint {id}, which covers records up to {} of {} keys \
                 (checkpoint {covering} covered them all: {covered:?})",
                c.position,
                setup.keys
            );
            let first_after = seen.first_after.load(Ordering::Acquire);
            ensure!(
                first_after == c.position,
                "run {n}: the restarted job's first output is of record {first_after}, \
                 not of the restored checkpoint's position {}",
                c.position
            );
            Some((id, c))
        }
    };
    if bqbs {
        ensure!(
            seen.after.load(Ordering::Acquire) == 0,
            "run {n}: the takeover restarted the job ({} outputs of a later attempt)",
            seen.after.load(Ordering::Acquire)
        );
    }
    let first_output_us = rec.first_output_us.with_context(|| {
        format!("run {n}: the report has no first output after the restart: {rec:?}")
    })?;
    let restore_us = rec
        .restore_us
        .with_context(|| format!("run {n}: the report has no restore time: {rec:?}"))?;
    Ok(RunResult {
        run: n,
        first_output_ms: first_output_us as f64 / 1e3,
        restore_ms: restore_us as f64 / 1e3,
        detect_ms: rec.detect_us as f64 / 1e3,
        caught_up_ms: rec.caught_up_us.map(|u| u as f64 / 1e3),
        restored_checkpoint: restored.as_ref().map(|(id, _)| *id),
        state_bytes: restored.as_ref().map(|(_, c)| c.restore_bytes),
        whole_bytes: restored.as_ref().map(|(_, c)| c.whole_bytes),
        state_files: restored.as_ref().map(|(_, c)| c.files),
        file_bytes: restored.as_ref().map(|(_, c)| c.file_bytes),
        checkpoint_bytes: restored.as_ref().map(|(_, c)| c.checkpoint_bytes),
        replayed: rec.replayed_tuples,
        keys: setup.keys,
        outputs_after_restart: if bqbs {
            seen.before.load(Ordering::Acquire) - before_fault
        } else {
            seen.after.load(Ordering::Acquire)
        },
        cold: setup.cold,
        sync_ms,
        drop_ms,
        insert_s,
        run_s,
    })
}

/// The run's one recovery, of `kind`; an error for anything else.
fn the_recovery(report: &JobReport, n: usize, kind: RecoveryKind) -> Result<&RecoveryRecord> {
    match report.recovery.as_slice() {
        [r] if r.kind == kind => Ok(r),
        rs => bail!(
            "run {n}: expected one {} recovery (the injected fault), the report has {}{}: {rs:?}",
            kind.name(),
            rs.len(),
            if rs.iter().any(|r| r.unprovoked) {
                " (a stall among them: a larger --heartbeat-timeout-ms avoids it)"
            } else {
                ""
            }
        ),
    }
}

/// The running job: cancelled and joined if the run ends early (an error,
/// a signal).
struct Running {
    handle: Option<JobHandle>,
}

impl Running {
    /// An error if the job ended before its time, or a signal came.
    fn check(&mut self) -> Result<()> {
        if interrupted() {
            self.cancel();
            bail!("interrupted");
        }
        if self.handle.as_ref().is_some_and(JobHandle::is_finished) {
            let h = self.handle.take().expect("checked");
            return match h.join() {
                Ok(_) => bail!("the job ended before the measurement was done"),
                Err(e) => Err(e).context("the job failed"),
            };
        }
        Ok(())
    }

    /// Recovery points the standbys' primaries published so far, and
    /// those following standbys applied.
    fn points(&self) -> Option<(u64, u64)> {
        self.handle.as_ref().map(|h| {
            let s = h.status();
            (s.standby_points_published, s.standby_points_followed)
        })
    }

    fn join(mut self) -> Result<JobReport> {
        let h = self.handle.take().context("the job was joined already")?;
        Ok(h.join()?)
    }

    fn cancel(&mut self) {
        if let Some(h) = self.handle.take() {
            h.cancel();
            let _ = h.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel();
    }
}

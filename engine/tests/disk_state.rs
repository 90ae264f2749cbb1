//! The disk state backend end to end: a keyed job whose state is many
//! times its cache, checkpointed incrementally and restarted by injected
//! panics, commits exactly what the in-memory backend's clean run does.

mod common;

use common::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::state::{DiskBackend, StateBackend};
use tandem::{
    CheckpointConfig, CheckpointMode, IterSource, JobBuilder, RestartStrategy, RuntimeConfig,
    TupleId,
};

/// Records per run; keys are `n % KEYS`, so each key gets a few records.
const N: u64 = 60_000;
const KEYS: u64 = 20_000;

fn build(out: &Path) -> tandem::Job {
    let job = JobBuilder::new("disk-state");
    job.default_parallelism(2);
    let out = out.to_path_buf();
    job.source("src", |i| {
        let (inst, par) = (i.instance, i.parallelism);
        IterSource(
            (0..N)
                .filter(move |n| (*n as usize) % par == inst)
                .map(|n| (n, n)),
        )
    })
    // Slow enough (~0.6 s a run) that checkpoints complete between the
    // faults, deltas among them, on a machine busy with other tests too.
    .rate_limit(100_000.0)
    .map("map", |n: u64| ((n.wrapping_mul(7_919) % KEYS) as u32, n))
    .key_by(|p: &(u32, u64)| p.0)
    .process("keyed", |_| PerKey)
    .sink("sink", move |info| LineSink::new(&out, info, true));
    job.build().unwrap()
}

fn config(dir: &Path, backend: StateBackend) -> RuntimeConfig {
    let mut cp = CheckpointConfig::every(Duration::from_millis(15));
    cp.mode = CheckpointMode::ExactlyOnce;
    cp.dir = Some(dir.join("checkpoints"));
    cp.incremental = Some(tandem::state::delta::Incremental {
        max_deltas: 20,
        max_delta_ratio: 4.0,
    });
    RuntimeConfig::default()
        .cores(cores())
        .pin(false)
        .checkpoint(cp)
        .restart(RestartStrategy::FixedDelay {
            attempts: 10,
            delay: Duration::ZERO,
        })
        // A restore loads the chain before the operator starts.
        .heartbeat_timeout(Duration::from_millis(2_000))
        .state_backend(backend)
}

/// The smallest cache the backend takes (2 × 1,024 entries an instance):
/// each instance's 10,000 keys go to disk and come back.
fn tiny(dir: &Path) -> StateBackend {
    StateBackend::Disk(DiskBackend {
        cache_bytes: 1,
        dir: Some(dir.join("state")),
    })
}

#[test]
fn the_disk_backend_under_restart_all_commits_what_the_memory_backends_clean_run_does() {
    quiet_injected_panics();
    let clean_dir = tempdir("disk-clean");
    build(&clean_dir.join("out"))
        .run(&config(&clean_dir, StateBackend::Memory))
        .unwrap();
    let clean = committed_lines(&clean_dir.join("out"));
    assert_eq!(
        clean.len() as u64,
        N + KEYS,
        "a line per record and per key"
    );

    let dir = tempdir("disk-faulted");
    let faults = Faults::new(vec![
        (
            "keyed",
            TupleId::new(0, 9_000),
            ProbeAction::Panic("1".into()),
        ),
        (
            "keyed",
            TupleId::new(1, 17_000),
            ProbeAction::Panic("2".into()),
        ),
        (
            "keyed",
            TupleId::new(0, 26_000),
            ProbeAction::Panic("3".into()),
        ),
    ]);
    let cfg = config(&dir, tiny(&dir)).probes(Arc::new(faults.clone()));
    let report = build(&dir.join("out")).run(&cfg).unwrap();
    assert!(faults.all_fired(), "every fault fired");
    assert!(report.recovery.len() >= 3, "{:?}", report.recovery);
    assert_same(&clean, &committed_lines(&dir.join("out")));
    let cp = &report.checkpoints;
    assert!(cp.incremental > 0, "no checkpoint wrote a delta: {cp:?}");
    // Every store went with its instance.
    let left: Vec<_> = std::fs::read_dir(dir.join("state"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "stores left behind: {left:?}");
    std::fs::remove_dir_all(clean_dir).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// A checkpoint taken while `keyed` still ran under `backend`: its state
/// is in it.
fn mid_checkpoint(dir: &Path, backend: StateBackend) -> std::path::PathBuf {
    let mut cfg = config(dir, backend);
    cfg.checkpoint.as_mut().expect("checkpoints").retain = 1_000;
    build(&dir.join("out")).run(&cfg).unwrap();
    let mut all = tandem::checkpoint::list(&dir.join("checkpoints")).unwrap();
    all.sort_by_key(|l| l.id);
    all.into_iter()
        .find(|l| {
            let m = l.load().unwrap();
            m.files
                .iter()
                .any(|f| f.operator == "keyed" && f.payload_len > 0)
        })
        .expect("a checkpoint with keyed state")
        .manifest_path
}

/// Each backend's checkpoint, restored into the other: refused before
/// the job starts, naming both backends and the operator — not tried
/// and failed at every restart until the strategy gives up. The
/// manifest records the backend that wrote it.
#[test]
fn a_checkpoint_restores_only_into_the_backend_that_wrote_it() {
    for (wrote, into) in [("disk", "memory"), ("memory", "disk")] {
        let dir = tempdir(&format!("cross-{wrote}"));
        let backend = |name: &str| match name {
            "disk" => tiny(&dir),
            _ => StateBackend::Memory,
        };
        let mid = mid_checkpoint(&dir, backend(wrote));
        let m = tandem::checkpoint::Manifest::load(&mid).unwrap();
        assert_eq!(m.state_backend.as_deref(), Some(wrote));
        let again = dir.join("again");
        let cfg = RuntimeConfig {
            restore_from: Some(mid),
            ..config(&again, backend(into))
        };
        let err = build(&again.join("out")).run(&cfg).unwrap_err();
        assert!(
            matches!(err, tandem::JobError::Incompatible { .. }),
            "refused at start, not after attempts: {err:#}"
        );
        let msg = format!("{err:#}");
        assert!(
            msg.contains(&format!("written by the {wrote} state backend"))
                && msg.contains(&format!("runs the {into} backend"))
                && msg.contains("`keyed`"),
            "{msg}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_standby_on_the_disk_backend_is_refused_before_the_job_starts() {
    let dir = tempdir("disk-standby");
    let job = JobBuilder::new("disk-standby");
    job.source("src", |_| IterSource((0..10u64).map(|n| (n, n))))
        .map("map", |n: u64| ((n % 3) as u32, n))
        .standby()
        .key_by(|p: &(u32, u64)| p.0)
        .process("keyed", |_| PerKey)
        .for_each("sink", |_| {});
    let cfg = RuntimeConfig::default()
        .cores(1)
        .standby(tandem::StandbyConfig::default())
        .state_backend(tiny(&dir));
    let err = job.build().unwrap().run(&cfg).unwrap_err();
    assert!(err.to_string().contains("disk state backend"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
